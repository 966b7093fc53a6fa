"""Exporters of the metrics port (:mod:`ratchet.metrics`); each is imported only when used."""
