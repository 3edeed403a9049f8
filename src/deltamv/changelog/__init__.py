"""The change log (CONTRACT sections 2 and 3): the only package that parses its format."""
