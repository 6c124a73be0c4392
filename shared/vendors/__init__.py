"""Device vendors (HAMi's ``Devices`` implementations): pure codecs and rules, one module per family."""
