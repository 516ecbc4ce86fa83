"""Instruction and preference data: building conversations, their filters, preference pairs and theirs."""
