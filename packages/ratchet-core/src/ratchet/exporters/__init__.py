"""Exporters of what Ratchet observes (traces: :mod:`ratchet.exporters.otel`); each imports its
third-party library only when used."""
