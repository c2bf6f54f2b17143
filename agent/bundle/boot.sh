#!/bin/sh
# boot.sh PORT USER ROOT: starts the agent in a VM, from the agent's disk.
#
# The VM's cloud-init runs this on every boot, as root, from the disk mounted read-only under
# /run (function/compose/workloads/kubevirt/cloud_init.py). It writes the agent's two systemd
# units into /run/systemd/system, which is root's and empty at every boot, so no unit outlives
# the disk that holds its program, and starts them without waiting: cloud-init is still
# running, and the service is ordered after it.
#
# The socket unit makes systemd the owner of the agent's port, from now until the VM stops: it
# passes the listening socket to the agent (socket activation), and holds it while the agent
# restarts, so that no local user can take the port above 1024 in between and receive the
# gateway's requests with their access token. It listens on the bare port with BindIPv6Only, so
# on both IPv4 and IPv6 and neither family's wildcard is left to take; on a guest booted without
# IPv6 (ipv6.disable=1) systemd takes a bare port as IPv4's, where `[::]:PORT` would leave the
# unit without a socket, and the port free.
#
# The service runs the agent as root, so that it can act as any local user; the sandbox's user
# is its default, and the workspace is the root of files and commands. The sandbox's users share
# the VM, where no network policy stands between them and the agent, so it refuses every
# connection from the VM's own addresses (--remote-only). Its OOMScoreAdjust makes the kernel's
# OOM killer pick a command that eats the memory, not the agent; commands raise their own score
# back to 0.
#
# Root writes two files, through no path anyone else can change: each a fresh temporary file
# made beside the unit by mktemp (O_EXCL, never following a link), renamed over the unit (a
# rename replaces a link, never follows it; -T refuses a directory in its place).
set -eu

die() {
  echo "boot.sh: $*" >&2
  exit 1
}

[ $# -eq 3 ] || die "usage: boot.sh PORT USER ROOT"
port=$1 user=$2 root=$3
# Each goes into a unit: nothing that systemd would split, quote or expand.
case $port in '' | *[!0-9]* | 0*) die "PORT must be a number from 1 to 65535, not '$port'" ;; esac
[ "$port" -le 65535 ] || die "PORT must be a number from 1 to 65535, not '$port'"
case $user in '' | [!a-z_]* | *[!a-z0-9_-]*) die "USER must be a plain user name, not '$user'" ;; esac
case $root in /*) ;; *) die "ROOT must be an absolute path, not '$root'" ;; esac
case $root in *[!A-Za-z0-9/._-]*) die "ROOT must be a plain path, not '$root'" ;; esac

here=$(cd "$(dirname "$0")" && pwd -P)
case $here in /*[!A-Za-z0-9/._-]* | [!/]*) die "the agent's disk is at an unusual path: '$here'" ;; esac
python=$(command -v python3) || die "no python3 on PATH: the agent needs CPython 3.11 or newer"
case $python in /*) ;; *) die "python3 is not a program: '$python'" ;; esac

units=/run/systemd/system
# Not created here: its existence is how programs know that systemd runs this machine.
[ -d "$units" ] || die "$units is missing: this guest does not run systemd"
name=workspace-sandbox-agent

tmp=
trap 'if [ -n "$tmp" ]; then rm -f "$tmp"; fi' EXIT
# write_unit UNIT: standard input becomes $units/UNIT.
write_unit() {
  tmp=$(mktemp "$units/.$name.XXXXXXXX")
  cat >"$tmp"
  chmod 644 "$tmp"
  mv -fT "$tmp" "$units/$1"
  tmp=
}

write_unit "$name.socket" <<UNIT
[Unit]
Description=Workspace sandbox agent's port, held by systemd while the agent restarts

[Socket]
ListenStream=$port
BindIPv6Only=both
NoDelay=true
Backlog=1024
UNIT

# After cloud-config too, where cloud-init's set-passwords module restarts sshd: the sandbox
# is ready when the agent answers, and SSH must work by then.
write_unit "$name.service" <<UNIT
[Unit]
Description=Workspace sandbox agent: files and commands for the platform's gateway
Requires=$name.socket
After=$name.socket local-fs.target network.target cloud-init.service cloud-init-network.service
After=cloud-config.service ssh.service
# Never give up: the sandbox is not ready until the agent answers.
StartLimitIntervalSec=0

[Service]
ExecStart=$python -I $here/workspace-sandbox-agent --remote-only --root $root --user $user
Restart=always
RestartSec=2
LimitNOFILE=65536
OOMScoreAdjust=-900
UNIT
trap - EXIT

systemctl daemon-reload
systemctl start --no-block "$name.socket" "$name.service"
