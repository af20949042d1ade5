"""Catalogs: GPU types, zones, prices, cloud instances and their fabrics, a cluster file, a user's
own catalog file.
"""
