"""Notifications: ``delivery`` sends them (hung off the audit trail, retried with backoff);
``channels`` is where admins say where they go."""
