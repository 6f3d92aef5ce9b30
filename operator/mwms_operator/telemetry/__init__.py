"""Telemetry: the metrics the operator exports, its log lines, and its memory."""
