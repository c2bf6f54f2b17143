"""A resource the function asks Crossplane to fetch for its next call (a required resource)."""

from typing import TypedDict


# The fields are the selector's as fn.py writes it; a TypedDict, since they are camelCase.
class Requirement(TypedDict):
    apiVersion: str
    kind: str
    name: str
    namespace: str


Requirements = dict[str, Requirement]
"""Requirement name -> what to fetch; the name is where Crossplane puts the answer."""


def require(api_version: str, kind: str, name: str, namespace: str) -> Requirement:
    return {"apiVersion": api_version, "kind": kind, "name": name, "namespace": namespace}
