"""Load, soak and benchmark drivers: the server as a subprocess, driven over real gRPC."""
