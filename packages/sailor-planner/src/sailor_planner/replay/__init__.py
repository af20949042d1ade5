"""Availability traces and their replay under re-planning policies."""
