"""Parameter profiles: profiles/base.yaml states every key once (its default, and its help as the comment beside
it); profiles/NAME.yaml holds only the values a profile changes, each with why. `render` gives a profile's
params.yaml, `entries` the help, `explain` and `markdown` the help as text and as docs/parameters.md."""

from biocheck.profiles.docs import explain, markdown
from biocheck.profiles.helptext import OPTIONAL, Entry, Key, entries
from biocheck.profiles.render import BASE, description, inline, is_override, names, overrides, render, values

__all__ = ["BASE", "OPTIONAL", "Entry", "Key", "description", "entries", "explain", "inline", "is_override",
           "markdown", "names", "overrides", "render", "values"]
