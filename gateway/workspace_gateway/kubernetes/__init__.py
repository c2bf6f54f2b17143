"""`--kubernetes`: sandboxes as WorkspaceSandbox objects, keys as Secrets, one leader by Lease.

`objects` maps E2B's sandboxes to the objects and back (plain dicts, no I/O); `calls` makes the
backend's calls and waits on the watch (`cache`, `view`); `pools` hands warm-pool members out
and refills them; `backend` is the Backend itself. Nothing outside this package imports the
Kubernetes client, so `--local` never loads it.
"""
