"""Settings, read from the environment.

With nothing set, the console runs embedded: SQLite, tasks run in-process, an in-memory channel
layer and the simulated cluster. Production and the tests set ``DATABASE_URL`` (MySQL/MariaDB)
and ``REDIS_URL`` (Celery broker and the Channels layer). A bad value stops start-up with a
message that names the variable.
"""

import re
from pathlib import Path
from urllib.parse import urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()


def env_bool(name: str, default: bool) -> bool:
    """A boolean variable; anything but a clear yes or no is refused."""
    raw = env.str(name, default="").strip().lower()
    if not raw:
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true or false)")


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = str(env.str(name, default=default)).strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of {', '.join(choices)}")
    return value


def env_secret(name: str, default: str = "") -> str:
    """A secret from ``NAME``, or from the file named by ``NAME_FILE`` (Docker/Kubernetes)."""
    path = env.str(f"{name}_FILE", default="")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={path!r} cannot be read: {exc}") from exc
    return str(env.str(name, default=default))


def database_from_url(url: str) -> dict[str, object]:
    """Django's DATABASES entry for a ``sqlite://`` or ``mysql://`` URL, or a clear refusal."""
    scheme = urlsplit(url).scheme
    if scheme not in {"sqlite", "mysql"} or "://" not in url:
        raise ImproperlyConfigured(
            f"DATABASE_URL={url!r} is not understood: use sqlite:///path or "
            "mysql://user:password@host:port/name"
        )
    config: dict[str, object] = dict(env.db_url_config(url))
    if not config.get("NAME"):
        raise ImproperlyConfigured(f"DATABASE_URL={url!r} names no database")
    if scheme == "sqlite":
        # IMMEDIATE: a transaction takes the write lock when it starts, so two writers queue
        # instead of one failing half-way (the audit chain appends under that lock).
        config["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 20}
        return config
    options = dict(config.get("OPTIONS") or {})  # type: ignore[call-overload]
    options.setdefault("charset", "utf8mb4")
    options.setdefault("init_command", "SET sql_mode='STRICT_TRANS_TABLES'")
    config["OPTIONS"] = options
    config["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}
    config["CONN_MAX_AGE"] = 60
    config["CONN_HEALTH_CHECKS"] = True
    return config


DEBUG = env_bool("DEBUG", default=True)
SECRET_KEY = env_secret("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY (or SECRET_KEY_FILE) must be set when DEBUG is off")
    SECRET_KEY = "embedded-default-insecure-key-do-not-use-in-production"  # noqa: S105
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# HTTPS only once DEBUG is off. Behind a proxy that terminates TLS, set SECURE_PROXY_SSL_HEADER
# to the header it sets (e.g. HTTP_X_FORWARDED_PROTO) so requests it forwarded count as secure;
# each default can be turned off on its own (e.g. SECURE_SSL_REDIRECT=false when the proxy
# redirects itself).
_proxy_header = env.str("SECURE_PROXY_SSL_HEADER", default="").strip()
SECURE_PROXY_SSL_HEADER = (_proxy_header, "https") if _proxy_header else None
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=not DEBUG)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", default=not DEBUG)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 31536000)
# Subdomains of the console's own host name only (e.g. *.console.example.org).
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
# Preloading is the domain owner's choice (a submission for the registered domain), not ours.
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", default=False)
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
if SECURE_HSTS_SECONDS < 0:
    raise ImproperlyConfigured("SECURE_HSTS_SECONDS must not be negative")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",  # its old plain keys are hashed by a console migration
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "channels",
    # The loop's four floors, lowest first, then the tools that stand beside it.
    "fleet",
    "detection",
    "remediation",
    "recovery_console.console",
    "lab.demo",
    "lab.bench",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # JSON bodies over MAX_UPLOAD_BYTES or nested past MAX_JSON_DEPTH: refused before any view.
    "recovery_console.jsonbodies.JsonBodyLimits",
    # Static files from STATIC_ROOT (after collectstatic) whatever DEBUG says: Daphne serves none.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "recovery_console.urls"
WSGI_APPLICATION = None
ASGI_APPLICATION = "recovery_console.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": database_from_url(env.str("DATABASE_URL", default="sqlite:///db.sqlite3"))}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    name = Path(str(DATABASES["default"]["NAME"]))
    DATABASES["default"]["NAME"] = name if name.is_absolute() else BASE_DIR / name
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Repeated failed logins lock the user name out (fleet/throttle.py); API
# tokens are checked by digest, and a client address sending many wrong ones is refused a while.
AUTHENTICATION_BACKENDS = ["fleet.throttle.ThrottledModelBackend"]
LOGIN_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=5)
TOKEN_FAILURE_LIMIT = env.int("TOKEN_FAILURE_LIMIT", default=20)
LOGIN_LOCKOUT_SECONDS = env.int("LOGIN_LOCKOUT_SECONDS", default=900)
if min(LOGIN_FAILURE_LIMIT, TOKEN_FAILURE_LIMIT, LOGIN_LOCKOUT_SECONDS) < 1:
    raise ImproperlyConfigured(
        "LOGIN_FAILURE_LIMIT, TOKEN_FAILURE_LIMIT and LOGIN_LOCKOUT_SECONDS must be positive"
    )

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(BASE_DIR / "staticfiles")))
# Compressed copies (gzip, brotli when installed) are written by collectstatic and served by
# WhiteNoise to clients that accept them.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# Redis carries Celery's queue and the Channels layer in production; empty means embedded.
REDIS_URL = env.str("REDIS_URL", default="")
if REDIS_URL and urlsplit(REDIS_URL).scheme not in {"redis", "rediss", "unix"}:
    raise ImproperlyConfigured(f"REDIS_URL={REDIS_URL!r} is not a redis:// URL")

CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", default=not REDIS_URL)
if not CELERY_TASK_ALWAYS_EAGER and not REDIS_URL:
    raise ImproperlyConfigured("CELERY_TASK_ALWAYS_EAGER=false needs REDIS_URL for the broker")
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_BROKER_URL = REDIS_URL or "memory://"
# Nothing reads a task's return value: keep none (a result per task was ~170k keys a day).
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
# A worker rides out a restart of Redis: it keeps trying to reconnect, at start-up too, and
# notices a dead connection within seconds instead of waiting on it.
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# Tasks in hand when the connection drops cannot be acknowledged: stop them and take them again
# from the queue on reconnecting, rather than finish them and see them redelivered an hour later.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_connect_timeout": 5,
    "socket_timeout": 30,
    "socket_keepalive": True,
    "retry_on_timeout": True,
    "health_check_interval": 10,
}
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = "UTC"

# Shared by every process (login throttling, cycle leases): Redis in production.
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "rc",
        }
    }

CHANNEL_LAYER = env_choice(
    "CHANNEL_LAYER", default="redis" if REDIS_URL else "memory", choices=("memory", "redis")
)
if CHANNEL_LAYER == "redis":
    if not REDIS_URL:
        raise ImproperlyConfigured("CHANNEL_LAYER=redis needs REDIS_URL")
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Where the simulated cluster writes its jobs' output files and nodes' system logs.
SIMULATOR_OUTPUT_DIR = Path(env.str("SIMULATOR_OUTPUT_DIR", default=str(BASE_DIR / "var" / "sim")))
DETECTION_POLL_SECONDS = env.float("DETECTION_POLL_SECONDS", default=5.0)
if DETECTION_POLL_SECONDS <= 0:
    raise ImproperlyConfigured("DETECTION_POLL_SECONDS must be positive")
# A cycle reads telemetry for about this long, then carries on next cycle, so one busy cluster
# cannot hold the workers; a cluster has one cycle queued or running at a time (a lease that
# runs out after CYCLE_LEASE_SECONDS should a worker die mid-cycle).
CYCLE_BUDGET_SECONDS = env.float("CYCLE_BUDGET_SECONDS", default=10.0)
if CYCLE_BUDGET_SECONDS <= 0:
    raise ImproperlyConfigured("CYCLE_BUDGET_SECONDS must be positive")
CYCLE_LEASE_SECONDS = env.int("CYCLE_LEASE_SECONDS", default=120)
if CYCLE_LEASE_SECONDS < CYCLE_BUDGET_SECONDS:
    raise ImproperlyConfigured("CYCLE_LEASE_SECONDS must be at least CYCLE_BUDGET_SECONDS")

# Settings documents name secrets by reference (README, "Secrets and outbound connections"):
# {"env": NAME} reads a variable whose name starts with SECRET_ENV_PREFIX, {"file": NAME} a file
# inside SECRETS_DIR (empty: no file references). OUTBOUND_ALLOWED_HOSTS limits the hosts
# telemetry sources, webhooks and the scheduler's SSH transport connect to (exact names or
# *.domain; empty: any).
SECRET_ENV_PREFIX = env.str("SECRET_ENV_PREFIX", default="RC_SECRET_")
if not re.fullmatch(r"[A-Z][A-Z0-9_]*_", SECRET_ENV_PREFIX):
    raise ImproperlyConfigured(
        f"SECRET_ENV_PREFIX={SECRET_ENV_PREFIX!r} must be upper case and end in _ (RC_SECRET_)"
    )
SECRETS_DIR = env.str("SECRETS_DIR", default="")
if SECRETS_DIR and not Path(SECRETS_DIR).is_absolute():
    raise ImproperlyConfigured(f"SECRETS_DIR={SECRETS_DIR!r} must be an absolute path")
OUTBOUND_ALLOWED_HOSTS = env.list("OUTBOUND_ALLOWED_HOSTS", default=[])

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # People: a personal token (``Token <key>``) for REST clients, or the browser's session
    # (with CSRF). Controllers authenticate with their own ``Bearer`` tokens in the Advisor API.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "recovery_console.console.api.tokens.PersonalTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "recovery_console.console.api.pagination.Cursor",
    # The API takes JSON only: one parser to bound (``jsonbodies``), one schema for clients.
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "PAGE_SIZE": 100,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Recovery Console API",
    "DESCRIPTION": "Workloads, attempts, anomalies, advice, nodes and the audit trail.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "recovery_console.console.api.schema.document_refusals",
    ],
    # Several models have a ``state`` or ``status``; name each enum after what it belongs to.
    "ENUM_NAME_OVERRIDES": {
        "WorkloadStateEnum": "fleet.models.WorkloadState",
        "AttemptStateEnum": "fleet.models.JOB_STATE_CHOICES",
        "NodeStateEnum": "fleet.models.NODE_STATE_CHOICES",
        "AdviceStateEnum": "remediation.models.AdviceState",
        "AdviceActionEnum": "fleet.core.taxonomy.ACTION_CHOICES",
        "AnomalyStateEnum": "detection.models.AnomalyState",
        "NodeHealthStateEnum": "remediation.models.NodeHealthState",
        "ModeRequestStatusEnum": "recovery_console.console.models.ModeRequestStatus",
    },
}

# Notifications (webhooks and email). Email goes to the console by default; set EMAIL_BACKEND
# to django.core.mail.backends.smtp.EmailBackend and the EMAIL_* variables to send it.
EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env.str("EMAIL_HOST", default="localhost")
EMAIL_PORT = env.int("EMAIL_PORT", default=25)
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = env_secret("EMAIL_HOST_PASSWORD", default="")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", default=False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", default=False)
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    raise ImproperlyConfigured("EMAIL_USE_TLS and EMAIL_USE_SSL cannot both be true")
EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=10)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="recovery-console@localhost")
NOTIFICATION_TIMEOUT_SECONDS = env.float("NOTIFICATION_TIMEOUT_SECONDS", default=5.0)
# Retries back off exponentially from this (with jitter), up to 10 minutes apart.
NOTIFICATION_RETRY_BASE_SECONDS = env.float("NOTIFICATION_RETRY_BASE_SECONDS", default=1.0)
# Links in notifications point here (e.g. https://console.example.org); empty: no links.
CONSOLE_BASE_URL = env.str("CONSOLE_BASE_URL", default="").rstrip("/")
# With tasks run in-process (embedded), deliveries go to a background thread so a slow webhook
# never holds up the loop; with a Celery worker they are queued.
NOTIFY_IN_BACKGROUND_THREAD = env_bool(
    "NOTIFY_IN_BACKGROUND_THREAD", default=CELERY_TASK_ALWAYS_EAGER
)

# /metrics is open unless this is set; then Prometheus sends it as a Bearer token.
METRICS_TOKEN = env_secret("METRICS_TOKEN", default="")

# The audit trail's entries are sealed with this HMAC key, kept outside the database so a
# person with write access to the tables cannot re-hash a changed row. Set it before the first
# migrate; a different key makes every earlier entry fail verification.
AUDIT_HMAC_KEY = env_secret("AUDIT_HMAC_KEY", default="")
if not AUDIT_HMAC_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "AUDIT_HMAC_KEY (or AUDIT_HMAC_KEY_FILE) must be set when DEBUG is off"
        )
    AUDIT_HMAC_KEY = "embedded-default-insecure-audit-key"  # noqa: S105
# Where the periodic audit anchor (the head's sequence and hash) is appended; empty: log only.
AUDIT_ANCHOR_FILE = env.str("AUDIT_ANCHOR_FILE", default="")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}

# Uploads (the Test signals page): refused past this size while they stream in, never held.
MAX_UPLOAD_BYTES = env.int("MAX_UPLOAD_BYTES", default=10 * 1024 * 1024)
FILE_UPLOAD_HANDLERS = [
    "recovery_console.console.uploads.UploadSizeLimit",
    "django.core.files.uploadhandler.MemoryFileUploadHandler",
    "django.core.files.uploadhandler.TemporaryFileUploadHandler",
]
# JSON documents (API bodies, the policy and telemetry documents of the forms) nest no deeper
# than this; Python's parser recurses per level, and no document of ours needs a tenth of it.
MAX_JSON_DEPTH = env.int("MAX_JSON_DEPTH", default=64)
if not 2 <= MAX_JSON_DEPTH <= 500:
    raise ImproperlyConfigured("MAX_JSON_DEPTH must be between 2 and 500")
# A pasted log is form data, not a file: the same limit, so a paste is refused by name too.
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_UPLOAD_BYTES + 1024 * 1024
