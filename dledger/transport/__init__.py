"""Transports between members: the protocol, and an in-memory fault-injecting network."""
