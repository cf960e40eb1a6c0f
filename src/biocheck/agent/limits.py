"""The agent's limits, stated once: every config that carries one (AgentConfig, GraphConfig, Prompts) takes
its default from here."""

MAX_SEARCHES = 5  # searches per episode (the paper's budget); then the intervention asks for the report
MAX_REFUSALS = 2  # refuse-and-remind rounds after the budget before the episode ends without a report
