"""What a request is: the API's or a page's."""

API_PREFIX = "/api/"


def is_api(path: str) -> bool:
    """Whether `path` is the JSON API's: bearer tokens count there, errors are JSON, a page's
    CSRF token is not asked of a bearer, and a missing sign-in is a 401, not the sign-in page."""
    return path.startswith(API_PREFIX)
