"""The gallery's Jinja2 environment: its templates (pages, inline CSS and JavaScript, SVG plots) live in
templates/gallery/ and are package data, so the gallery needs no network and no second file.

Autoescape is on for every template: whatever a model, a paper or a data file wrote is escaped where a
template prints it. The pages' script only shows and hides elements by their data-* attributes; it never
builds HTML from data, so nothing a model wrote can reach it as code.
"""

from __future__ import annotations

from functools import cache

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape


@cache
def env() -> Environment:
    from biocheck.rewards.funnel import STEP_NAMES

    e = Environment(loader=PackageLoader("biocheck.evaluate", "templates/gallery"),
                    autoescape=select_autoescape(enabled_extensions=("html.jinja", "svg.jinja"), default=True),
                    undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    e.globals["funnel_steps"] = list(STEP_NAMES.items())  # the funnel table's columns (macros.html.jinja)
    return e
