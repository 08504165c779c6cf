"""Fake LLM vendors for tests: FastAPI apps on loopback speaking the real wire formats."""

from tests.agents.fakes._server import FakeLLMServer, Step, anthropic_server, openai_server

__all__ = ["FakeLLMServer", "Step", "anthropic_server", "openai_server"]
