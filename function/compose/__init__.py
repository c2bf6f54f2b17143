"""Concern modules: each composes one kind of thing and returns {resource-name: manifest}."""
