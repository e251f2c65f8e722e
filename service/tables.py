"""Import every table module so ``SQLModel.metadata`` describes the whole schema (for Alembic)."""

from sqlmodel import SQLModel

from service.approvals import models as approvals_models
from service.audit import models as audit_models
from service.drafts import models as drafts_models
from service.executions import models as executions_models
from service.gateway import models as gateway_models
from service.grants import models as grants_models
from service.keys import models as keys_models
from service.sessions import models as sessions_models
from service.shop import models as shop_models
from service.tokens import models as tokens_models
from service.webhooks import models as webhooks_models

metadata = SQLModel.metadata

__all__ = [
    "approvals_models",
    "audit_models",
    "drafts_models",
    "executions_models",
    "gateway_models",
    "grants_models",
    "keys_models",
    "metadata",
    "sessions_models",
    "shop_models",
    "tokens_models",
    "webhooks_models",
]
