//! Optional field selection as cel-go runs it (the `cel` crate's own fails on a missing field
//! and on a field selected after `.?`): `a.?b` is `optional.none()` when `a` has no `b`, and
//! every selection after it is optional too (`a.?b.c` is `a.?b.?c`), so
//! `input.?data.KEY.orValue("x")`, as kro's own tests write, gives `"x"` while the data is
//! missing. The parsed expression is rewritten once at compile time: each such selection calls
//! [`SELECT`], registered in every [`crate::Scope`]. The same pass makes the bare keys of
//! kro's `runtime.newCondition({type: ..., status: ...})` strings, as kro's macro does.

use std::sync::Arc;

use kube_cel::cel::common::ast::operators::OPT_SELECT;
use kube_cel::cel::common::ast::{CallExpr, EntryExpr, Expr, LiteralValue};
use kube_cel::cel::objects::{Key, OptionalValue};
use kube_cel::cel::{Context, IdedExpr, ResolveResult, Value};

/// The function optional selections are rewritten to call.
const SELECT: &str = "@kmeta.optionalSelect";

/// Registers [`SELECT`] in `ctx`.
pub(crate) fn register(ctx: &mut Context<'_>) {
    ctx.add_function(SELECT, select);
}

/// `operand.?field`: none when `operand` is none or has no `field`.
fn select(operand: Value, field: Arc<String>) -> ResolveResult {
    let inner = match &operand {
        Value::Opaque(o) => match o.downcast_ref::<OptionalValue>() {
            Some(opt) => opt.value().cloned(),
            None => Some(operand.clone()),
        },
        other => Some(other.clone()),
    };
    let got = match inner {
        Some(Value::Map(m)) => m.map.get(&Key::String(field)).cloned(),
        _ => None,
    };
    Ok(Value::Opaque(Arc::new(match got {
        Some(v) => OptionalValue::of(v),
        None => OptionalValue::none(),
    })))
}

/// Rewrites the optional selections of `e`; whether `e` itself is optional-valued.
pub(crate) fn rewrite(e: &mut IdedExpr) -> bool {
    match &mut e.expr {
        Expr::Call(c) if c.func_name == OPT_SELECT && c.args.len() == 2 => {
            rewrite(&mut c.args[0]);
            c.func_name = SELECT.to_owned();
            true
        }
        Expr::Select(s) if !s.test => {
            if !rewrite(&mut s.operand) {
                return false;
            }
            let operand = std::mem::take(&mut s.operand);
            let field = IdedExpr {
                id: e.id,
                expr: Expr::Literal(LiteralValue::String(s.field.as_str().into())),
            };
            e.expr = Expr::Call(CallExpr {
                func_name: SELECT.to_owned(),
                target: None,
                args: vec![*operand, field],
            });
            true
        }
        Expr::Select(s) => {
            rewrite(&mut s.operand);
            false
        }
        Expr::Call(c) => {
            crate::kro::name_condition_keys(c);
            let through = c.func_name == "_[_]" || c.func_name == "_[?_]";
            let mut optional = false;
            if let Some(t) = c.target.as_mut() {
                rewrite(t);
            }
            for (i, a) in c.args.iter_mut().enumerate() {
                let o = rewrite(a);
                optional |= through && i == 0 && o;
            }
            optional || c.func_name == "_[?_]"
        }
        Expr::Comprehension(c) => {
            for part in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                rewrite(part);
            }
            false
        }
        Expr::List(l) => {
            l.elements.iter_mut().for_each(|x| {
                rewrite(x);
            });
            false
        }
        Expr::Map(m) => {
            m.entries
                .iter_mut()
                .for_each(|x| rewrite_entry(&mut x.expr));
            false
        }
        Expr::Struct(st) => {
            st.entries
                .iter_mut()
                .for_each(|x| rewrite_entry(&mut x.expr));
            false
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => false,
    }
}

fn rewrite_entry(e: &mut EntryExpr) {
    match e {
        EntryExpr::StructField(f) => {
            rewrite(&mut f.value);
        }
        EntryExpr::MapEntry(m) => {
            rewrite(&mut m.key);
            rewrite(&mut m.value);
        }
    }
}
