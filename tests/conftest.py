"""Loaded before any test module: importing dledger first turns gRPC's fork handlers off
(dledger/__init__.py) before a test module imports grpc, which reads the setting once."""

import dledger  # noqa: F401
