"""The plane StatefulSet kind: the hardened pod where a ComputePlane has no agent-sandbox.

`workload.py` answers the `Workload` protocol; `statefulset.py` composes the StatefulSet.
"""
