"""The web console for people: approvals chat, label review, audit review (not yet built)."""
