"""A network-policy verdict evaluator: proves isolation without a cluster.

`evaluate` applies Cilium's semantics (and Kubernetes NetworkPolicy's) to a set of policy
manifests over a modelled cluster (`Environment`); `cozystack_environment` and
`cozystack_baseline` model what a Cozystack tenant namespace already has; `deletion` lists
which policies still stand at each moment of a ComputePlane placement's deletion; `selects`
is the one label-selector matcher.
"""

from function.policy.baseline import cozystack_baseline
from function.policy.deletion import Moment, deletion, outlives
from function.policy.environment import (
    Environment,
    Node,
    Service,
    Workload,
    cozystack_environment,
)
from function.policy.selector import NotModelledError, selects
from function.policy.verdict import Flow, Verdict, evaluate, format_verdict

__all__ = [
    "Environment",
    "Flow",
    "Moment",
    "Node",
    "NotModelledError",
    "Service",
    "Verdict",
    "Workload",
    "cozystack_baseline",
    "cozystack_environment",
    "deletion",
    "evaluate",
    "format_verdict",
    "outlives",
    "selects",
]
