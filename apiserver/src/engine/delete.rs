//! DELETE and DELETE collection: preconditions, admission, and the start of deletion (the
//! garbage collector in [`super::gc`] settles the rest).

use super::body::admission_error;
use super::inner::Inner;
use super::list::ListOpts;
use super::object::meta_str;
use super::request::{DeleteOpts, Deleted, Propagation, Req, WriteOpts};
use crate::error::{ApiError, ApiResult};
use crate::hooks::{Admission, Operation};
use crate::store::{Obj, uid_of};
use std::collections::VecDeque;

impl Inner {
    /// DELETE one object.
    pub(crate) fn delete(
        &mut self,
        adm: &Admission,
        req: &Req,
        opts: &DeleteOpts,
    ) -> ApiResult<Deleted> {
        let (key, obj) = self.stored(req)?;
        if let Some(uid) = &opts.uid
            && Some(uid.as_str()) != uid_of(&obj)
        {
            return Err(ApiError::conflict(
                req.target(),
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    uid_of(&obj).unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && Some(rv.as_str()) != meta_str(&obj, "resourceVersion")
        {
            return Err(ApiError::conflict(
                req.target(),
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&obj, "resourceVersion").unwrap_or("")
                ),
            ));
        }
        let mut probe = (*obj).clone();
        adm.run(
            &req.def.group,
            &req.version,
            &req.def.plural,
            &mut probe,
            Operation::Delete,
        )
        .map_err(|e| admission_error(e, req, &key.name))?;
        let wopts = WriteOpts {
            dry_run: opts.dry_run,
            user: opts.user.clone(),
            ..Default::default()
        };
        self.validating_policies(req, &wopts, Operation::Delete, None, Some(&obj))?;
        if opts.dry_run {
            return Ok(Deleted::Pending(obj));
        }
        let mut work = VecDeque::new();
        let policy = opts.propagation.unwrap_or(Propagation::Background);
        let out = self.delete_inner(&key, policy, &mut work);
        self.settle(work);
        let api_version = req.api_version();
        Ok(match out {
            Some(Deleted::Pending(_)) => match self.store.get(&key) {
                Some(o) => Deleted::Pending(Self::present(&o, &api_version)),
                None => Deleted::Gone(obj),
            },
            Some(Deleted::Gone(o)) => Deleted::Gone(Self::present(&o, &api_version)),
            None => Deleted::Gone(obj),
        })
    }

    /// DELETE a collection; returns the affected objects.
    pub(crate) fn delete_collection(
        &mut self,
        adm: &Admission,
        req: &Req,
        list: &ListOpts,
        opts: &DeleteOpts,
    ) -> ApiResult<Vec<Obj>> {
        let items = self.list(req, list)?.items;
        let mut out = vec![];
        for item in items {
            let name = meta_str(&item, "name").unwrap_or_default().to_string();
            let ns = meta_str(&item, "namespace").map(str::to_string);
            let r = Req {
                name: Some(name),
                ns: if req.def.namespaced { ns } else { None },
                ..req.clone()
            };
            match self.delete(adm, &r, opts) {
                Ok(Deleted::Gone(o)) | Ok(Deleted::Pending(o)) => out.push(o),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}
