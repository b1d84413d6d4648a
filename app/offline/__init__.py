"""Installable and offline (issue 34): the web app manifest, the service worker and what it caches."""
