"""The shop app: items and orders, their admin, and JSON pages read through txcache."""
