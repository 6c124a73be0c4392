"""HAMi wire codecs: pure encode/decode of the annotations HAMi's device plugin and scheduler exchange.

One module per format (see ``docs/codecs.md``); every malformed value raises ``shared.errors.DecodeError``.
"""
