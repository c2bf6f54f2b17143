"""Where a sandbox's parts go: a module per placement, beside what they share.

`namespace.py` composes into the tenant's namespace, `compute_plane.py` into a namespace of a
ComputePlane (`plane.py` composes the plane, `plane_guards.py` what keeps it isolated), and
`sandbox_namespace.py` into a host namespace of the sandbox's own. `placement.py` holds their
common answer and staging; `never_moves.py` keeps a workspace where it was made.
"""
