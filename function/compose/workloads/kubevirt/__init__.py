"""The KubeVirt kind: a VirtualMachine booting from a standalone DataVolume, which outlives it.

`workload.py` answers the `Workload` protocol; `virtual_machine.py` composes the VM,
`workspace_volume.py` its disk, `cloud_init.py` the guest's user data and `account.py` the
guest account that disk holds.
"""
