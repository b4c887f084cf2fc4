"""Reviews, mode requests and notification channels move here from the fleet app (label
``recovery_console``): the models are created in Django's state on their existing tables, and
their content types (hence their permissions, and the groups holding them) move with them."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# The values these fields had when this migration was written (the models have since moved to
# the console app, whose migrations carry them on).
ADVICE_ACTIONS = [
    ("restart_excluding_node", "Restart excluding nodes"),
    ("restart", "Restart"),
    ("stop", "Stop"),
    ("none", "No action"),
]


def _all_notification_events():
    return ["stop", "drain", "mode_change", "review_needed"]


MOVED = ("review", "modechangerequest", "notificationchannel")


def move_content_types(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model in MOVED:
        if ContentType.objects.filter(app_label="console", model=model).exists():
            continue
        ContentType.objects.filter(app_label="recovery_console", model=model).update(
            app_label="console"
        )


def move_content_types_back(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="console", model__in=MOVED).update(
        app_label="recovery_console"
    )


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("recovery_console", "0006_audit_indexes"),
        ("remediation", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='NotificationChannel',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('kind', models.CharField(choices=[('webhook', 'Webhook (JSON, Slack-compatible)'), ('email', 'Email')], max_length=16)),
                        ('target', models.CharField(max_length=1000)),
                        ('events', models.JSONField(blank=True, default=_all_notification_events)),
                        ('enabled', models.BooleanField(default=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('cluster', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='notification_channels', to='recovery_console.cluster')),
                    ],
                    options={
                        'db_table': 'recovery_console_notificationchannel',
                        'ordering': ['cluster', 'id'],
                    },
                ),
                migrations.CreateModel(
                    name='ModeChangeRequest',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('requested_at', models.DateTimeField()),
                        ('note', models.TextField(blank=True)),
                        ('agreement_rate', models.FloatField(blank=True, null=True)),
                        ('labelled', models.PositiveIntegerField(default=0)),
                        ('status', models.CharField(choices=[('pending', 'Pending'), ('approved', 'Approved'), ('rejected', 'Rejected')], default='pending', max_length=16)),
                        ('decided_at', models.DateTimeField(blank=True, null=True)),
                        ('decision_note', models.TextField(blank=True)),
                        ('cluster', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='mode_requests', to='recovery_console.cluster')),
                        ('decided_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='mode_decisions', to=settings.AUTH_USER_MODEL)),
                        ('requested_by', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='mode_requests', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'recovery_console_modechangerequest',
                        'ordering': ['-requested_at'],
                        'permissions': [('approve_modechangerequest', 'Can approve or reject a request for action mode'), ('return_to_monitor', 'Can return a cluster to monitor mode')],
                        'indexes': [models.Index(fields=['cluster', 'status'], name='recovery_co_cluster_a0f9a4_idx')],
                    },
                ),
                migrations.CreateModel(
                    name='Review',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('agrees', models.BooleanField()),
                        ('preferred_action', models.CharField(choices=ADVICE_ACTIONS, max_length=32)),
                        ('comment', models.TextField(blank=True)),
                        ('generation', models.PositiveIntegerField(default=1)),
                        ('created_at', models.DateTimeField()),
                        ('updated_at', models.DateTimeField()),
                        ('advice', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='reviews', to='remediation.advice')),
                        ('reviewer', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='reviews', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'recovery_console_review',
                        'ordering': ['-updated_at'],
                        'constraints': [models.UniqueConstraint(fields=('advice', 'reviewer'), name='review_one_per_reviewer')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_types, move_content_types_back),
    ]
