"""`forkpatch server`: the command server of this installation (see forkpatch.cmdserver)."""

from __future__ import annotations

import click

from forkpatch import log
from forkpatch.cli.context import Ctx, pass_ctx


@click.command()
@click.argument("action", type=click.Choice(["status", "stop"]), default="status")
@click.option("--all", "every", is_flag=True, help="Every forkpatch server of this user.")
@pass_ctx
def server(c: Ctx, action: str, every: bool) -> None:
    """Show or stop the background server that runs forkpatch's commands.

    The first forkpatch command starts it; it runs each later command in a fresh
    process forked from its already-imported modules, and stops after 15 idle
    minutes. FORKPATCH_SERVER=0 runs every command in its own process instead."""
    from forkpatch.cmdserver import control

    servers = control.running(every=every)
    if action == "stop":
        control.stop(servers)
        log.result(f"stopped {len(servers)} server(s)")
        return
    for s in servers:
        log.result(f"running: pid {s.pid}, socket {s.socket}")
    if not servers:
        log.result("no server is running (the next forkpatch command starts one)")
