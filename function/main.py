"""The `workspace-sandbox` command: serve the function, or render a WorkspaceSandbox offline."""

import asyncio
import gc
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click
import grpc
from crossplane.function import logging, runtime

from function import offline
from function.errors import FieldError
from function.explain import audit, flows
from function.explain import explain as explain_flows
from function.fn import FunctionRunner
from function.model.platform import SandboxPlatform
from function.policy.verdict import Enforcement, IpProtocol
from function.wire import to_dict

Command = TypeVar("Command", bound=Callable[..., Any])
_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


def composition_option(purpose: str) -> Callable[[Command], Command]:
    # Package data: an installed wheel or the image finds it as a checkout does.
    return click.option(
        "--composition",
        type=_FILE,
        default=offline.SHIPPED_COMPOSITION,
        help=f"Composition {purpose}. Default: the one installed with this package, "
        "identical to the repository's compositions/workspacesandbox.yaml.",
    )


# What Crossplane would send besides the XR; a ComputePlane placement needs both to be placed.
# crossplane render's names and short forms, then the ones this command had first.
_STREAM = click.Path(exists=True, path_type=Path)
OBSERVED = click.option(
    "--observed-resources",
    "-o",
    "--observed",
    "observed",
    type=_STREAM,
    metavar="PATH",
    help="YAML file, or directory of them, of observed composed resources (matched by their "
    "crossplane.io/composition-resource-name annotation), and optionally the XR with status.",
)
REQUIRED = click.option(
    "--required-resources",
    "-e",
    "--required",
    "--extra-resources",
    "required",
    type=_STREAM,
    multiple=True,
    metavar="PATH",
    help="YAML file, or directory of them, of resources offered to the function's "
    "requirements; repeat for more.",
)


@click.group()
def cli() -> None:
    """One isolated Linux sandbox per workspace on Cozystack, as a Crossplane function."""


@cli.command()
@click.option("--debug", "-d", is_flag=True, help="Emit debug logs: each call's timing and result.")
@click.option(
    "--address", default="0.0.0.0:9443", show_default=True, help="Address to listen on for gRPC."
)
@click.option(
    "--tls-certs-dir",
    "--tls-server-certs-dir",
    "tls_certs_dir",
    metavar="DIR",
    envvar="TLS_SERVER_CERTS_DIR",
    show_envvar=True,
    help="Directory with tls.crt, tls.key and the ca.crt that callers' certificates must chain "
    "to (mTLS).",
)
@click.option(
    "--insecure",
    is_flag=True,
    help="Serve without TLS, ignoring any certificates (for local testing and `crossplane "
    "render`).",
)
@click.option(
    "--max-recv-message-size",
    default=4,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Maximum size of a received message, in MiB.",
)
def serve(
    debug: bool,  # noqa: FBT001  # click passes flags positionally by keyword
    address: str,
    tls_certs_dir: str | None,
    insecure: bool,  # noqa: FBT001  # click passes flags positionally by keyword
    max_recv_message_size: int,
) -> None:
    """Run the gRPC server Crossplane calls (v1 and v1beta1)."""
    # --insecure wins over certificates, as in function-sdk-go and the template's help. Given
    # both, the SDK would bind a TLS and a plaintext listener to the same address, each taking
    # about half the connections.
    try:
        creds = None if insecure else _credentials(tls_certs_dir)
    except CertificatesError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    logging.configure(logging.Level.DEBUG if debug else logging.Level.INFO)
    # Everything imported so far lives as long as the process: keep the collector off it, and
    # let it run less often, since a call allocates many short-lived dicts and frees them all.
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)
    runtime.serve(
        FunctionRunner(debug=debug),
        address,
        # The SDK accepts None with --insecure; its annotation says otherwise.
        creds=creds,  # type: ignore[arg-type]  # SDK: creds may be None with insecure
        insecure=insecure,
        options=[("grpc.max_receive_message_length", max_recv_message_size * 1024 * 1024)],
    )


class CertificatesError(Exception):
    """The server has no usable mTLS certificates; the message says what to give it."""


_CERT_FILES = ("tls.crt", "tls.key", "ca.crt")
_NEEDS = "the certificates directory needs tls.crt, tls.key and ca.crt"


def _credentials(certs_dir: str | None) -> grpc.ServerCredentials:
    """The SDK's mTLS credentials, after checking each file it would read.

    The SDK would raise a bare ValueError without a directory and a FileNotFoundError for a
    missing file, and with a file that isn't PEM, gRPC fails later with "Failed to bind".
    """
    if not certs_dir:
        raise CertificatesError(
            "serve needs mTLS certificates: set --tls-certs-dir or TLS_SERVER_CERTS_DIR to a "
            "directory with tls.crt, tls.key and ca.crt, or pass --insecure to serve without TLS"
        )
    root = Path(certs_dir)
    if not root.is_dir():
        raise CertificatesError(f"{root}: no such directory; {_NEEDS}")
    for name in _CERT_FILES:
        path = root / name
        try:
            pem = path.read_bytes()
        except OSError as err:
            raise CertificatesError(f"{path}: {err.strerror}; {_NEEDS}") from None
        if b"-----BEGIN " not in pem:
            raise CertificatesError(f"{path}: not PEM-encoded; {_NEEDS}")
    return runtime.load_credentials(certs_dir)


@cli.command()
@click.argument("xr", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@composition_option("whose step input (a SandboxPlatform) to use")
@OBSERVED
@REQUIRED
@click.option(
    "--include-function-results",
    "-r",
    "--include-results",
    "include_results",
    is_flag=True,
    help="Also print the function's results, as objects of kind Result.",
)
@click.option(
    "--include-full-xr",
    "-x",
    is_flag=True,
    help="Print the XR's metadata and spec too, not only the status the function set.",
)
@click.option(
    "--include-context",
    "-c",
    is_flag=True,
    help="Also print the pipeline's context, as an object of kind Context.",
)
@click.option(
    "--now",
    type=click.DateTime(formats=["%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S%z"]),
    help="Fix the clock, e.g. 2026-12-01T18:00:00Z.",
)
def render(  # noqa: PLR0917  # click passes every option by keyword
    xr: Path,
    composition: Path,
    observed: Path | None,
    required: tuple[Path, ...],
    include_results: bool,  # noqa: FBT001  # click passes flags positionally by keyword
    include_full_xr: bool,  # noqa: FBT001  # click passes flags positionally by keyword
    include_context: bool,  # noqa: FBT001  # click passes flags positionally by keyword
    now: datetime | None,
) -> None:
    """Run the function in-process and print what `crossplane render` would.

    That is the XR with the status the function set and the Ready condition Crossplane derives,
    then every composed resource with the metadata Crossplane adds. The options take
    crossplane render's names; --observed, --required and --include-results are kept.
    """
    logging.configure(logging.Level.DISABLED)
    clock = now.replace(tzinfo=now.tzinfo or UTC) if now else datetime.now(UTC)
    try:
        files = offline.request(xr, composition, observed, required)
    except offline.InputError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    rsp = asyncio.run(offline.run(FunctionRunner(clock=lambda: clock), files))
    printed = offline.stream(
        files.req,
        rsp,
        files.step,
        include_results=include_results,
        include_full_xr=include_full_xr,
        include_context=include_context,
    )
    click.echo(printed, nl=False)
    fatal = offline.fatal(rsp)
    if fatal:
        click.echo(f"error: {fatal}", err=True)
        sys.exit(1)


@cli.group()
def policy() -> None:
    """Platform network policy: the guard manifest, and verdicts for flows."""


@policy.command()
@composition_option("whose SandboxPlatform input sets the site deny list")
def guard(composition: Path) -> None:
    """Print the CiliumClusterwideNetworkPolicy that guards every sandbox pod."""
    try:
        click.echo(offline.guard(composition), nl=False)
        _warn_unstated(offline.platform(composition))
    except (offline.InputError, FieldError) as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)


def _warn_unstated(platform: SandboxPlatform) -> None:
    """What the function warns every WorkspaceSandbox of, on stderr for the platform engineer."""
    if (unstated := platform.network.unstated_warning) is not None:
        click.echo(f"warning: {unstated}", err=True)


@policy.command()
@click.argument("xr", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--to", "to", help="Destination: an IP, a DNS name, or namespace/pod.")
@click.option("--from", "source", help="Caller: an IP or namespace/pod, connecting to the sandbox.")
@click.option("--port", type=click.IntRange(1, 65535), help="Destination port.")
@click.option("--protocol", type=click.Choice(["TCP", "UDP", "SCTP", "ICMP"]), default="TCP")
@composition_option("whose SandboxPlatform input the sandbox is rendered with")
@click.option("--no-baseline", is_flag=True, help="Leave out Cozystack's tenant baseline policies.")
@OBSERVED
@REQUIRED
@click.option(
    "--enforcement",
    type=click.Choice(["cilium", "kubernetes"]),
    default="cilium",
    help="cilium: every policy; kubernetes: a plain CNI that only enforces NetworkPolicies.",
)
def explain(  # noqa: PLR0917  # click passes every option by keyword
    xr: Path,
    to: str | None,
    source: str | None,
    port: int | None,
    protocol: IpProtocol,
    composition: Path,
    no_baseline: bool,  # noqa: FBT001  # click passes flags positionally by keyword
    observed: Path | None,
    required: tuple[Path, ...],
    enforcement: Enforcement,
) -> None:
    """Render XR and print the verdict, and the rule that decided it, for flows to and from it.

    With neither --to nor --from, audits a standard set of destinations and callers.
    """
    logging.configure(logging.Level.DISABLED)
    if to and source:
        click.echo("error: give --to or --from, not both", err=True)
        sys.exit(2)
    try:
        files = offline.request(xr, composition, observed, required)
        platform = offline.platform(composition)
    except (offline.InputError, FieldError) as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    rsp = asyncio.run(offline.run(FunctionRunner(), files))
    fatal = offline.fatal(rsp)
    if fatal:
        click.echo(f"error: {fatal}", err=True)
        sys.exit(1)
    try:
        found = audit(
            rsp, to_dict(files.req.observed.composite.resource), platform, baseline=not no_baseline
        )
        asked = flows(found, to, source, port, protocol)
        click.echo("\n".join(explain_flows(found, asked, enforcement)))
    except (LookupError, ValueError) as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    _warn_unstated(platform)
