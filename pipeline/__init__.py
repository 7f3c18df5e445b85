"""Sluice core library."""
