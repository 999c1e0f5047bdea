"""``creditbench methods`` and ``creditbench conformance NAME``: the registered methods, and
the conformance checks on one of them.

creditbench methods                       # every method, its paper, where it comes from
creditbench conformance mymethod          # the checks every built-in method passes
creditbench conformance mymethod --max-examples 500
creditbench new-method mymethod           # the files a built-in method needs, as GRPO's twin

A method from a plugin (a ``creditbench.methods`` entry point, see docs/contributing.md) is
tagged with its distribution, e.g. ``[plugin: mypkg 0.1.0]``. User errors print one line naming
the field to stderr and exit with code 2.
"""

from __future__ import annotations

import argparse
import importlib.util

from creditbench.methods.registry import UnknownMethodError, get_method, list_methods, method_origin
from creditbench.tools.cli.common import example_count, usage_error

TEST_PACKAGES = ("pytest", "hypothesis")


def _cmd_methods(args: argparse.Namespace) -> int:
    methods = list_methods()
    width = max(len(name) for name in methods)
    for name, cls in methods.items():
        tags = " [reference: needs ground truth]" if cls.reference else ""
        origin = method_origin(name)
        if origin.kind != "builtin":
            tags += f" [{origin}]"
        print(f"{name:<{width}}  {cls.summary}{tags}")
        print(f"{'':<{width}}  paper: {cls.paper}")
    return 0


def _cmd_conformance(args: argparse.Namespace) -> int:
    for name in args.names:
        try:
            get_method(name)
        except UnknownMethodError as err:
            import difflib

            close = difflib.get_close_matches(name, list(list_methods()), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            return usage_error("conformance", f"NAME: {err}{hint}")
    missing = [package for package in TEST_PACKAGES if importlib.util.find_spec(package) is None]
    if missing:
        return usage_error(
            "conformance",
            f'the checks need {" and ".join(missing)}: pip install -e ".[test]" in the clone',
        )

    from creditbench.harness.conformance.runner import run_checks

    return run_checks(args.names, max_examples=args.max_examples)


def _cmd_new_method(args: argparse.Namespace) -> int:
    from pathlib import Path

    from creditbench.tools.new_method import NewMethodError, make_fixture, plan, write

    root = Path(args.root)
    title = args.title or args.name
    try:
        files = plan(root, args.name, title)
    except NewMethodError as err:
        return usage_error("new-method", str(err))
    write(files)
    for path in files:
        print(f"wrote {path.relative_to(root)}")
    if args.no_fixture:
        maker = "python tests/replay_fixtures/make_replay_fixtures.py"
        print(f"the replay fixture is left to: {maker} {args.name}")
        return 0
    return make_fixture(root, args.name)


def add_method_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``methods``, ``conformance`` and ``new-method`` to the ``creditbench`` parser."""
    p = sub.add_parser("methods", help="list every registered method and where it comes from")
    p.set_defaults(func=_cmd_methods)

    p = sub.add_parser(
        "conformance",
        help="run the conformance checks (advantage shapes, padding, group locality, the loss) "
        "on registered methods; exit 0 when all pass, 1 when one fails",
    )
    p.add_argument("names", nargs="+", metavar="NAME", help="a registered method")
    p.add_argument(
        "--max-examples",
        type=example_count,
        default=100,
        help="random batches per check (default 100, at most 100,000; the same ones on every run)",
    )
    p.set_defaults(func=_cmd_conformance)

    p = sub.add_parser(
        "new-method",
        help="write every file a built-in method needs (method, page, card, test, fixture, "
        "navigation, engines row, campaign pin) from a GRPO twin (docs/contributing.md)",
    )
    p.add_argument("name", metavar="NAME", help="the registry name, a lower-case identifier")
    p.add_argument("--title", default="", help="the paper's title (default: NAME)")
    p.add_argument("--root", default=".", help="the creditbench clone (default: here)")
    p.add_argument(
        "--no-fixture", action="store_true", help="skip recording the replay fixture (a short run)"
    )
    p.set_defaults(func=_cmd_new_method)
