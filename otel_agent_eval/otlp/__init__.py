"""OTLP codecs: recorded or received OTLP (JSON and protobuf) to spans, and received spans back to requests.

Below `offline/` (files) and `serve/` (the hop), which both read OTLP; imports nothing of ours.
"""
