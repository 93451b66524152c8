"""The inversion catalogue, shipped inside miner as the package `miner.catalogue_data`.

One YAML file per inversion type at <family>/<name>.yaml; see README.md and miner/catalogue.py.
"""
