"""Live tool-efficiency scoring for LLM agents on OpenTelemetry spans."""
