"""What to run and how: Job, Inventory, Plan, execution options, the training recipe and RunSpec
(with the machinery deriving flags, config files and wire messages from spec fields).
"""
