"""The Celery app: JSON only, configured from Django's settings (``CELERY_*``)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "recovery_console.settings")

app = Celery("recovery_console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
