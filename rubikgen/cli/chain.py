"""`rubikgen ctl SOCKET attach|detach|list|reopen|rules|stats|flows|trace`: change a running binary's NF chain (or its
rule set: rules/reload_cli.py; stats and flows: cli/live.py) through its control socket (`--control SOCKET`; protocol in runtime-c/main/rg_control.c)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from rubikgen.cli.ctlsock import ask


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    c = sub.add_parser(
        "ctl",
        help="attach, detach or list the NFs of a running binary (--control SOCKET)",
        description="The change applies between two packets on the running binary.",
    )
    c.add_argument("socket", help="the binary's --control socket")
    what = c.add_subparsers(dest="action", required=True)
    a = what.add_parser("attach", help="attach an NF at the end of the chain")
    a.add_argument("nf", help="a stock NF's name or the path of an NF's .so")
    a.add_argument("--name", help="the instance name (default: the NF's own)")
    a.add_argument(
        "nf_params",
        nargs=argparse.REMAINDER,
        metavar="KEY=VALUE ...",
        help="the NF's configuration (--name may come among them too)",
    )
    d = what.add_parser("detach", help="detach an NF (its outputs are written)")
    d.add_argument("name", help="the NF's instance name (see list)")
    what.add_parser("list", help="the NFs in chain order: NAME and what was loaded")
    what.add_parser(
        "reopen",
        help="reopen every NF's line output (logrotate's postrotate, as SIGHUP does)",
    )
    r = what.add_parser("rules", help="the rule set (a binary built with --rules-reload)")
    rw = r.add_subparsers(dest="rules_action", required=True)
    rw.add_parser("info", help="the stack, its fingerprint, the rules in force, reloads")
    rl = rw.add_parser(
        "reload", help="check and compile R.yaml against the stack, swap it in between packets"
    )
    rl.add_argument("rules_file", metavar="R.yaml")
    from rubikgen.cli.live import add_parsers as add_live_parsers

    add_live_parsers(what)
    c.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the reply (default 30)"
    )


def command(args: argparse.Namespace) -> int:
    if args.action == "rules":
        from rubikgen.rules.reload_cli import rules_command

        return rules_command(args)
    if args.action in ("stats", "flows", "trace"):
        from rubikgen.cli.live import command as live_command

        return live_command(args)
    if args.action == "attach":
        nf = args.nf
        if ("/" in nf or nf.endswith(".so")) and not os.path.isabs(nf):
            nf = os.path.abspath(nf)  # the binary's working directory may differ
        params, name = [], args.name
        it = iter(args.nf_params)
        for p in it:  # --name after the NF (REMAINDER keeps it among the parameters)
            if p == "--name":
                name = next(it, "")
            elif p.startswith("--name="):
                name = p.removeprefix("--name=")
            else:
                params.append(p)
        bad = [p for p in params if "=" not in p or p.startswith("=")]
        if bad:
            sys.stderr.write(f"rubikgen: error: '{bad[0]}' is not KEY=VALUE\n")
            return 2
        fields = ["attach", nf, name or "", *params]
    elif args.action == "detach":
        fields = ["detach", args.name]
    elif args.action == "reopen":
        fields = ["reopen"]
    else:
        fields = ["list"]
    return ask(args.socket, fields, args.timeout)
