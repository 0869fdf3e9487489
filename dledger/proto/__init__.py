"""Generated gRPC/protobuf code of the `dledger.v1` wire protocol (`dledger.proto`).

Do not edit the `*_pb2*` files: change `dledger.proto` and run `make genproto`
(grpcio-tools pinned in pyproject.toml); `tests/unit/test_proto_current.py` checks
that the committed code matches the .proto.
"""
