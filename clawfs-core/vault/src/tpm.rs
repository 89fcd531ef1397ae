//! TPM 2.0 sealing of the master key with tss-esapi: a sealed data object (keyed-hash, null
//! scheme) under a storage primary of the owner hierarchy, optionally bound by a PolicyPCR to
//! the current values of chosen SHA-256 PCRs.
//!
//! The primary is re-created from the same template on every unseal (the owner seed makes it
//! deterministic), so nothing needs to be persisted in the TPM; the sealed object's public and
//! private blobs live in `master-key.enc`. The private blob is encrypted and integrity-protected
//! by the TPM under the primary, so it is useless off this TPM.
//!
//! Rollback detection (`super::counter`): an NV index of type counter (TPM2_NT_COUNTER) in the
//! owner hierarchy, at a random handle of the range no company has registered
//! (0x01800000..=0x01BFFFFF, TCG "Registry of Reserved TPM 2.0 Handles and Localities" §2.2.2).
//! Its own (empty) authValue authorizes reads and increments (`authread`, `authwrite`, `noDA`),
//! so only defining and undefining it need the owner hierarchy. Not `orderly`: an orderly counter
//! may jump ahead after a power loss, which the vault would take for a rollback. A counter never
//! goes down: not by increments, and not by undefining and redefining it (a new counter starts at
//! the highest value any counter of this TPM ever had).

use std::convert::TryFrom;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};
use tss_esapi::attributes::{
    NvIndexAttributesBuilder, ObjectAttributesBuilder, SessionAttributesBuilder,
};
use tss_esapi::constants::response_code::Tss2ResponseCodeKind;
use tss_esapi::constants::{NvIndexType, SessionType};
use tss_esapi::handles::{KeyHandle, NvIndexHandle, NvIndexTpmHandle, TpmHandle};
use tss_esapi::interface_types::algorithm::{HashingAlgorithm, PublicAlgorithm};
use tss_esapi::interface_types::key_bits::RsaKeyBits;
use tss_esapi::interface_types::resource_handles::{Hierarchy, NvAuth, Provision};
use tss_esapi::interface_types::session_handles::PolicySession;
use tss_esapi::structures::{
    Digest, KeyedHashScheme, NvPublicBuilder, PcrSelectionList, PcrSelectionListBuilder, PcrSlot,
    Private, Public, PublicBuilder, PublicKeyedHashParameters, RsaExponent, SensitiveData,
    SymmetricDefinition, SymmetricDefinitionObject,
};
use tss_esapi::tcti_ldr::TctiNameConf;
use tss_esapi::traits::{Marshall, UnMarshall};
use tss_esapi::{Context, Error as TssError};

use super::crypto::Key256;
use super::error::VaultError;

/// The sealed blobs of a master key.
pub struct TpmSealed {
    /// TPM2B_PUBLIC of the sealed object, marshalled.
    pub public: Vec<u8>,
    /// TPM2B_PRIVATE of the sealed object (encrypted by the TPM).
    pub private: Vec<u8>,
}

fn tpm_err(what: &str, e: TssError) -> VaultError {
    if is_policy_failure(&e) {
        return VaultError::PcrMismatch;
    }
    VaultError::Tpm(format!("{what}: {e}"))
}

fn is_policy_failure(e: &TssError) -> bool {
    matches!(
        rc_kind(e),
        Some(Tss2ResponseCodeKind::PolicyFail) | Some(Tss2ResponseCodeKind::Policy)
    )
}

fn rc_kind(e: &TssError) -> Option<Tss2ResponseCodeKind> {
    match e {
        TssError::Tss2Error(rc) => rc.kind(),
        TssError::WrapperError(_) => None,
    }
}

/// Opens a TPM context on `tcti` (e.g. `device:/dev/tpmrm0`, `swtpm:host=127.0.0.1,port=2321`).
pub fn context(tcti: &str) -> Result<Context, VaultError> {
    let conf = TctiNameConf::from_str(tcti)
        .map_err(|e| VaultError::NoTpm(format!("bad TCTI {tcti:?}: {e}")))?;
    Context::new(conf).map_err(|e| VaultError::NoTpm(format!("cannot open TCTI {tcti:?}: {e}")))
}

fn primary(ctx: &mut Context) -> Result<KeyHandle, VaultError> {
    let template = tss_esapi::utils::create_restricted_decryption_rsa_public(
        SymmetricDefinitionObject::AES_128_CFB,
        RsaKeyBits::Rsa2048,
        RsaExponent::default(),
    )
    .map_err(|e| tpm_err("primary template", e))?;
    ctx.execute_with_nullauth_session(|c| {
        c.create_primary(Hierarchy::Owner, template, None, None, None, None)
    })
    .map(|r| r.key_handle)
    .map_err(|e| tpm_err("create primary", e))
}

fn pcr_selection(pcrs: &[u8]) -> Result<PcrSelectionList, VaultError> {
    let mut slots = Vec::new();
    for &p in pcrs {
        if p > 23 {
            return Err(VaultError::Tpm(format!(
                "PCR index {p} out of range 0..=23"
            )));
        }
        slots.push(PcrSlot::try_from(1u32 << p).map_err(|e| tpm_err(&format!("PCR {p}"), e))?);
    }
    PcrSelectionListBuilder::new()
        .with_selection(HashingAlgorithm::Sha256, &slots)
        .build()
        .map_err(|e| tpm_err("PCR selection", e))
}

fn policy_session(ctx: &mut Context, kind: SessionType) -> Result<PolicySession, VaultError> {
    let session = ctx
        .start_auth_session(
            None,
            None,
            None,
            kind,
            SymmetricDefinition::AES_128_CFB,
            HashingAlgorithm::Sha256,
        )
        .map_err(|e| tpm_err("start policy session", e))?
        .ok_or_else(|| VaultError::Tpm("no policy session handle".into()))?;
    let (attrs, mask) = SessionAttributesBuilder::new()
        .with_decrypt(true)
        .with_encrypt(true)
        .build();
    ctx.tr_sess_set_attributes(session, attrs, mask)
        .map_err(|e| tpm_err("session attributes", e))?;
    PolicySession::try_from(session).map_err(|e| tpm_err("policy session", e))
}

/// The PolicyPCR digest over the *current* values of `pcrs` (trial session).
fn pcr_policy_digest(ctx: &mut Context, pcrs: &[u8]) -> Result<Digest, VaultError> {
    let selection = pcr_selection(pcrs)?;
    let (_, read_sel, digests) = ctx
        .execute_without_session(|c| c.pcr_read(selection.clone()))
        .map_err(|e| tpm_err("PCR read", e))?;
    if read_sel != selection {
        return Err(VaultError::Tpm(
            "the TPM returned fewer PCRs than asked (at most 8 per read)".into(),
        ));
    }
    let mut h = Sha256::new();
    for d in digests.value() {
        h.update(d.value());
    }
    let pcr_digest =
        Digest::try_from(h.finalize().to_vec()).map_err(|e| tpm_err("PCR digest", e))?;
    let trial = policy_session(ctx, SessionType::Trial)?;
    ctx.policy_pcr(trial, pcr_digest, selection)
        .map_err(|e| tpm_err("trial PolicyPCR", e))?;
    let digest = ctx
        .policy_get_digest(trial)
        .map_err(|e| tpm_err("policy digest", e))?;
    let _ = ctx.flush_context(tss_esapi::handles::SessionHandle::from(trial).into());
    Ok(digest)
}

/// Seals `key` on the TPM behind `tcti`, bound to the current values of `pcrs` (none: no PCR
/// policy, any process that can talk to this TPM can unseal).
pub fn seal(tcti: &str, pcrs: &[u8], key: &Key256) -> Result<TpmSealed, VaultError> {
    let mut ctx = context(tcti)?;
    let parent = primary(&mut ctx)?;
    let mut attrs = ObjectAttributesBuilder::new()
        .with_fixed_tpm(true)
        .with_fixed_parent(true)
        .with_no_da(true)
        .with_admin_with_policy(true);
    let policy = if pcrs.is_empty() {
        attrs = attrs.with_user_with_auth(true);
        Digest::default()
    } else {
        pcr_policy_digest(&mut ctx, pcrs)?
    };
    let public = PublicBuilder::new()
        .with_public_algorithm(PublicAlgorithm::KeyedHash)
        .with_name_hashing_algorithm(HashingAlgorithm::Sha256)
        .with_object_attributes(attrs.build().map_err(|e| tpm_err("attributes", e))?)
        .with_auth_policy(policy)
        .with_keyed_hash_parameters(PublicKeyedHashParameters::new(KeyedHashScheme::Null))
        .with_keyed_hash_unique_identifier(Digest::default())
        .build()
        .map_err(|e| tpm_err("sealed object template", e))?;
    let data =
        SensitiveData::try_from(key.bytes().to_vec()).map_err(|e| tpm_err("sensitive data", e))?;
    let created = ctx
        .execute_with_nullauth_session(|c| c.create(parent, public, None, Some(data), None, None))
        .map_err(|e| tpm_err("create sealed object", e))?;
    let _ = ctx.flush_context(parent.into());
    Ok(TpmSealed {
        public: created
            .out_public
            .marshall()
            .map_err(|e| tpm_err("marshal public", e))?,
        private: created.out_private.value().to_vec(),
    })
}

/// Unseals a master key in a fresh TPM context. `PcrMismatch` when the PCRs moved.
pub fn unseal(tcti: &str, pcrs: &[u8], sealed: &TpmSealed) -> Result<Key256, VaultError> {
    let mut ctx = context(tcti)?;
    let parent = primary(&mut ctx)?;
    let public = Public::unmarshall(&sealed.public)
        .map_err(|e| VaultError::Tpm(format!("sealed public blob does not parse: {e}")))?;
    let private = Private::try_from(sealed.private.clone())
        .map_err(|e| VaultError::Tpm(format!("sealed private blob: {e}")))?;
    let object = ctx
        .execute_with_nullauth_session(|c| c.load(parent, private, public))
        .map_err(|e| tpm_err("load sealed object (blobs changed, or another TPM)", e))?;
    let unsealed = if pcrs.is_empty() {
        ctx.execute_with_nullauth_session(|c| c.unseal(object.into()))
            .map_err(|e| tpm_err("unseal", e))
    } else {
        let session = policy_session(&mut ctx, SessionType::Policy)?;
        let selection = pcr_selection(pcrs)?;
        ctx.execute_without_session(|c| c.policy_pcr(session, Digest::default(), selection))
            .map_err(|e| tpm_err("PolicyPCR", e))?;
        let r = ctx
            .execute_with_session(Some(session.into()), |c| c.unseal(object.into()))
            .map_err(|e| tpm_err("unseal", e));
        let _ = ctx.flush_context(tss_esapi::handles::SessionHandle::from(session).into());
        r
    };
    let _ = ctx.flush_context(object.into());
    let _ = ctx.flush_context(parent.into());
    let data = unsealed?;
    Key256::from_slice(data.value())
        .ok_or_else(|| VaultError::Tpm(format!("unsealed {} bytes, want 32", data.value().len())))
}

/// Extends SHA-256 PCR `index` with `data` (for tests and for "lock on boot state change" drills).
pub fn pcr_extend(tcti: &str, index: u8, data: &[u8]) -> Result<(), VaultError> {
    use tss_esapi::handles::PcrHandle;
    use tss_esapi::structures::DigestValues;
    let mut ctx = context(tcti)?;
    let handle = PcrHandle::try_from(u32::from(index)).map_err(|e| tpm_err("PCR handle", e))?;
    let mut values = DigestValues::new();
    let d = Digest::try_from(Sha256::digest(data).to_vec()).map_err(|e| tpm_err("digest", e))?;
    values.set(HashingAlgorithm::Sha256, d);
    ctx.execute_with_nullauth_session(|c| c.pcr_extend(handle, values))
        .map_err(|e| tpm_err("PCR extend", e))
}

/// First NV index handle of the range no company has registered (TCG handle registry §2.2.2).
pub const NV_COUNTER_FIRST: u32 = 0x0180_0000;
/// Last NV index handle of that range.
pub const NV_COUNTER_LAST: u32 = 0x01BF_FFFF;

fn counter_err(index: u32, reason: impl Into<String>) -> VaultError {
    VaultError::RollbackCounter {
        index,
        reason: reason.into(),
    }
}

/// The ESYS handle of the NV counter at `index`, after checking that it is a counter.
fn open_counter(ctx: &mut Context, index: u32) -> Result<NvIndexHandle, VaultError> {
    let tpm_handle = NvIndexTpmHandle::new(index)
        .map_err(|_| counter_err(index, "is not an NV index handle"))?;
    let object = ctx
        .execute_without_session(|c| c.tr_from_tpm_public(TpmHandle::NvIndex(tpm_handle)))
        .map_err(|e| match rc_kind(&e) {
            Some(Tss2ResponseCodeKind::Handle) => counter_err(
                index,
                "is not defined in this TPM (undefined, TPM cleared, or another TPM)",
            ),
            _ => tpm_err(&format!("NV index {index:#010x}"), e),
        })?;
    let handle = NvIndexHandle::from(object);
    let (public, _) = ctx
        .execute_without_session(|c| c.nv_read_public(handle))
        .map_err(|e| tpm_err(&format!("NV_ReadPublic {index:#010x}"), e))?;
    let attrs = public.attributes();
    // Only the counter type guarantees that the value never goes down: an ordinary index of the
    // same handle could be written with any value.
    if attrs.index_type().ok() != Some(NvIndexType::Counter) || public.data_size() != 8 {
        return Err(counter_err(
            index,
            "is not a counter (TPM2_NT_COUNTER): something else was defined at its handle",
        ));
    }
    if !attrs.auth_read() || !attrs.auth_write() {
        return Err(counter_err(
            index,
            "is a counter without authread/authwrite: not the vault's",
        ));
    }
    Ok(handle)
}

fn read_counter(ctx: &mut Context, index: u32, handle: NvIndexHandle) -> Result<u64, VaultError> {
    let data = ctx
        .execute_with_nullauth_session(|c| c.nv_read(NvAuth::NvIndex(handle), handle, 8, 0))
        .map_err(|e| match rc_kind(&e) {
            Some(Tss2ResponseCodeKind::NvUninitialized) => {
                counter_err(index, "was never incremented (not the vault's)")
            }
            _ => tpm_err(&format!("NV_Read {index:#010x}"), e),
        })?;
    let bytes: [u8; 8] = data
        .value()
        .try_into()
        .map_err(|_| counter_err(index, format!("read {} bytes, want 8", data.value().len())))?;
    Ok(u64::from_be_bytes(bytes))
}

fn increment_counter(
    ctx: &mut Context,
    index: u32,
    handle: NvIndexHandle,
) -> Result<u64, VaultError> {
    ctx.execute_with_nullauth_session(|c| c.nv_increment(NvAuth::NvIndex(handle), handle))
        .map_err(|e| tpm_err(&format!("NV_Increment {index:#010x}"), e))?;
    read_counter(ctx, index, handle)
}

/// Defines a new NV counter for a vault at a random free handle in
/// [`NV_COUNTER_FIRST`]`..=`[`NV_COUNTER_LAST`] (owner hierarchy, empty owner authorization) and
/// increments it once (a counter has no value before its first increment). Returns its handle
/// and value.
pub fn nv_counter_define(tcti: &str) -> Result<(u32, u64), VaultError> {
    let mut ctx = context(tcti)?;
    let attrs = NvIndexAttributesBuilder::new()
        .with_nv_index_type(NvIndexType::Counter)
        .with_auth_read(true)
        .with_auth_write(true)
        .with_owner_read(true)
        .with_no_da(true)
        .build()
        .map_err(|e| tpm_err("NV counter attributes", e))?;
    let span = NV_COUNTER_LAST - NV_COUNTER_FIRST + 1;
    for _ in 0..64 {
        let index =
            NV_COUNTER_FIRST + u32::from_le_bytes(super::crypto::random_bytes::<4>()) % span;
        let public = NvPublicBuilder::new()
            .with_nv_index(NvIndexTpmHandle::new(index).map_err(|e| tpm_err("NV handle", e))?)
            .with_index_name_algorithm(HashingAlgorithm::Sha256)
            .with_index_attributes(attrs)
            .with_data_area_size(8)
            .build()
            .map_err(|e| tpm_err("NV counter template", e))?;
        let handle = match ctx
            .execute_with_nullauth_session(|c| c.nv_define_space(Provision::Owner, None, public))
        {
            Ok(h) => h,
            Err(e) if rc_kind(&e) == Some(Tss2ResponseCodeKind::NvDefined) => continue,
            Err(e) => {
                return Err(tpm_err(
                    "define the vault's NV counter (NV_DefineSpace, owner hierarchy)",
                    e,
                ))
            }
        };
        return match increment_counter(&mut ctx, index, handle) {
            Ok(value) => Ok((index, value)),
            Err(e) => {
                let _ = ctx.execute_with_nullauth_session(|c| {
                    c.nv_undefine_space(Provision::Owner, handle)
                });
                Err(e)
            }
        };
    }
    Err(VaultError::Tpm(
        "define the vault's NV counter: 64 random handles were all taken".into(),
    ))
}

/// The value of the vault's NV counter at `index`. `RollbackCounter` if the index is missing or
/// is not such a counter.
pub fn nv_counter_read(tcti: &str, index: u32) -> Result<u64, VaultError> {
    let mut ctx = context(tcti)?;
    let handle = open_counter(&mut ctx, index)?;
    read_counter(&mut ctx, index, handle)
}

/// Increments the vault's NV counter at `index`; returns the new value.
pub fn nv_counter_increment(tcti: &str, index: u32) -> Result<u64, VaultError> {
    let mut ctx = context(tcti)?;
    let handle = open_counter(&mut ctx, index)?;
    increment_counter(&mut ctx, index, handle)
}

/// Undefines the NV index `index` (owner hierarchy). For tests and for removing a vault's
/// counter along with the vault; nothing in the vault calls it.
pub fn nv_undefine(tcti: &str, index: u32) -> Result<(), VaultError> {
    let mut ctx = context(tcti)?;
    let tpm_handle = NvIndexTpmHandle::new(index).map_err(|e| tpm_err("NV handle", e))?;
    let object = ctx
        .execute_without_session(|c| c.tr_from_tpm_public(TpmHandle::NvIndex(tpm_handle)))
        .map_err(|e| tpm_err(&format!("NV index {index:#010x}"), e))?;
    ctx.execute_with_nullauth_session(|c| {
        c.nv_undefine_space(Provision::Owner, NvIndexHandle::from(object))
    })
    .map_err(|e| tpm_err(&format!("NV_UndefineSpace {index:#010x}"), e))
}
