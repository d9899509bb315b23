"""Faces that read the database for operators: the exporter's gauges and ``status``."""
