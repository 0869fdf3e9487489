"""The `dledger` command."""
