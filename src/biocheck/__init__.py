"""BioCheck: biomedical claim fact-checking with an RL-trained search agent."""
__version__ = "0.1.0"
