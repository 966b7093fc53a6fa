"""Exporters of what Ratchet observes (metrics of :mod:`ratchet.metrics`:
:mod:`ratchet.exporters.prometheus`; traces: :mod:`ratchet.exporters.otel`); each imports its
third-party library only when used."""
