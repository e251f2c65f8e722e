"""The gateway's table: which contract_version each schema of a gateway write action got."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column
from sqlmodel import Field, SQLModel

from service.sql import UTCDateTime


class GatewayContract(SQLModel, table=True):
    """One (action, contract_version) and the digest of the contract it stands for.

    The highest version of an action is its current one. Every process derives the same
    version from the same upstream schema, and a changed schema gets the next version, so
    approvals signed for the older contract stop counting (DESIGN.md §4).
    """

    __tablename__ = "gateway_contracts"

    action: str = Field(primary_key=True, max_length=64)
    contract_version: int = Field(primary_key=True)
    contract_sha256: str = Field(max_length=64)
    recorded_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
