"""The agent's final report, as one concept: its schema, reader, writer, renderers and quote matching.

  schema.py        Report, EvidenceItem, Summary, ParsedReport (the typed record every stage passes around)
  parse.py         parse_report: model text -> ParsedReport, tolerant, never raises (parse_*.py: its parts)
  writer.py        format_report: a Report in exactly the format the system prompt asks for
  render.py        Markdown / HTML / JSON for people (quotes highlighted in their abstracts)
  quotes.py        where a quote occurs in a paper's text: shared by render.py and the rewards

The agent, the rewards, training and evaluation import this package; it imports none of them.
"""
