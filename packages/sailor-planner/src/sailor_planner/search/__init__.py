"""The search over allocations x plans: templates, partitions, allocation, bounds."""
