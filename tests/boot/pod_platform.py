"""The stand-in platform with real pods: each Running sandbox is its rendered pod under a runtime.

`start` renders the sandbox's WorkspaceSandbox with the function's own code, runs the pod on
this host (`pod_host`) and returns once its agent answers `/health`, with the pod's address as
`status.endpoint`; `stop` stops the container and deletes it, its network and its folders but
the workspace, which a resume mounts again. While a pod runs, its container is restarted when
its process exits (restartPolicy Always, as kubelet does for a Sandbox's or StatefulSet's pod):
on the same workspace, volumes and address, without running its init containers again.
"""

import asyncio
import contextlib
import shutil
import tempfile
from pathlib import Path

from workspace_gateway.kubernetes.objects import PLURAL

from function.model.platform import SandboxPlatform
from tests.boot import pod_host
from tests.boot.pod_host import Images, RunningPod
from tests.boot.pod_render import pod_of
from tests.gateway import kube_fake
from tests.gateway.stand_in import Platform
from tests.support import PLATFORM

MAX_RESTARTS = 5
"""Restarts a pod's container may have in one test; more is a crash loop, and a failure."""


class PodPlatform(Platform):
    def __init__(
        self,
        cluster: kube_fake.Cluster,
        folder: Path,
        *,
        runtime: str,
        images: Images,
        platform: SandboxPlatform = PLATFORM,
    ) -> None:
        super().__init__(cluster, folder)
        self.runtime, self.images, self.platform = runtime, images, platform
        self.port = platform.gateway.agent_port
        self.pods: dict[tuple[str, str], RunningPod] = {}
        self.stacks: dict[tuple[str, str], contextlib.ExitStack] = {}
        self.restarts = 0
        self.start_seconds: list[float] = []
        """Each container start, `runtime run` to its agent's first /health answer."""

    async def run(self) -> None:
        await asyncio.gather(super().run(), self.supervise())

    async def supervise(self) -> None:
        """kubelet's part: a pod's container that exited is run again."""
        while True:
            for pod in list(self.pods.values()):
                if await asyncio.to_thread(pod.status) == "stopped":
                    self.restarts += 1
                    assert self.restarts <= MAX_RESTARTS, "the pod's container keeps exiting"
                    await asyncio.to_thread(self._rerun, pod)
            await asyncio.sleep(0.1)

    @staticmethod
    def _rerun(pod: RunningPod) -> None:
        pod.stop_main()
        pod.run_main()

    async def start(self, where: tuple[str, str]) -> None:
        xr = self.cluster.objects[(PLURAL, *where)]
        hostname, spec = pod_of(xr, self.platform)
        workspace = self.roots.get(where) or Path(tempfile.mkdtemp(prefix=f"{where[1]}-"))
        self.roots[where] = workspace
        folder = Path(tempfile.mkdtemp(prefix=f"pod-{where[1]}-", dir=self.folder))
        stack = contextlib.ExitStack()
        self.stacks[where] = stack
        pod = await asyncio.to_thread(
            stack.enter_context,
            pod_host.running(
                self.runtime, self.images, hostname, spec, folder=folder, workspace=workspace
            ),
        )
        self.pods[where] = pod
        self.start_seconds.append(await asyncio.to_thread(pod.started_to_healthy))
        self.hosts_of[where] = pod.netns.address

    async def stop(self, where: tuple[str, str]) -> None:
        self.pods.pop(where, None)
        stack = self.stacks.pop(where, None)
        if stack is not None:
            await asyncio.to_thread(stack.close)

    async def close(self) -> None:
        for where in list(self.stacks):
            await self.stop(where)
        for root in self.roots.values():
            shutil.rmtree(root, ignore_errors=True)
