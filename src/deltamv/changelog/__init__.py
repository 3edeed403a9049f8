"""The change log and snapshots (docs/changelog-format.md): the only package that parses them."""
