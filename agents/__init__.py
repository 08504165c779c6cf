"""Agents: proposers, the judge, the code-editing agent and their LLM providers."""
