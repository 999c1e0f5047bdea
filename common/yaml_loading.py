"""YAML as the project reads every file a user writes (run configs, suites, paper cards): the
safe loader, with a mapping that gives a key twice refused. PyYAML keeps the last of two equal
keys without a word, so ``lr: 1e-5`` above ``lr: 5e-5`` in one file would silently run the
second; the error names the key and the line of its second occurrence."""

from __future__ import annotations

from typing import Any

import yaml


class _UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base loader reports it
                break
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first on line {first + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """The YAML document in ``text``; ``yaml.YAMLError`` (with ``problem_mark``) for invalid
    YAML, a key given twice in one mapping included."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506  (a SafeLoader subclass)
