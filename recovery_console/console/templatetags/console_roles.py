"""``{% load console_roles %}``: whether the person holds a role on one cluster, for pages that
list several (the overview's cards). Only what is shown; views and services still check."""

from typing import Any

from django import template

from recovery_console.console.roles import roles_of

register = template.Library()


@register.simple_tag(takes_context=True)
def roles_on(context: dict[str, Any], cluster: Any) -> frozenset[str]:
    """The roles the request's user holds on ``cluster``."""
    return roles_of(context["request"].user, cluster)
