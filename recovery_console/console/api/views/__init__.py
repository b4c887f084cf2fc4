"""The console's REST API (``/api/v1/``): read-only viewsets, and verbs that call services; one
module per resource.

Every endpoint checks a role (``console.roles``): reading needs ``viewer``; each verb names the
role it needs in ``verb_roles``. Lists hold only the rows of clusters where the person is a
viewer (another cluster's row is a 404), and a verb needs its role on the row's own cluster.
Refusals by the approval workflow answer 409 with the reason, a missing role 403, invalid input
400.
"""
