"""API package shared by edge agents, the CLI and the control plane: protobuf/gRPC definitions only."""
