"""The gRPC stubs of `proto/creek.proto`, generated when the package is
built (see `setup.py`); `creek.proto` here is the copy they came from."""
