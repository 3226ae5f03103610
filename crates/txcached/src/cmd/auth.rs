//! `AUTH [default] password`.

use super::{ok, Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::auth::{password_matches, WRONG_PASSWORDS_PER_CONNECTION};

/// Replies `+OK` and marks the connection authenticated, or refuses.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let (user, password) = match args.remaining() {
        1 => (&b"default"[..], args.next_bytes()?),
        2 => (args.next_bytes()?, args.next_bytes()?),
        _ => return Err(CommandError::WrongArity(args.command())),
    };
    authenticate(context, user, password, args.command())?;
    ok(out);
    Ok(())
}

/// Checks a user name and password (AUTH and HELLO … AUTH); marks the session on success.
pub fn authenticate(
    context: &mut Context<'_>,
    user: &[u8],
    password: &[u8],
    command: &'static str,
) -> Result<(), CommandError> {
    let config = &context.node.config;
    if config.password.is_none() && config.stream_password.is_none() {
        return Err(CommandError::InvalidArgument {
            command,
            message: "called without any password configured for the default user \
                      (start txcached with --password)"
                .to_owned(),
        });
    }
    let default_user = user.eq_ignore_ascii_case(b"default");
    if default_user && secret_matches(config.stream_password.as_deref(), password) {
        context.session.authenticated = true;
        context.session.streams = true;
    } else if default_user && secret_matches(config.password.as_deref(), password) {
        context.session.authenticated = true;
        context.session.streams = config.stream_password.is_none();
    } else {
        // Throttled: a client guessing passwords must not fill the log.
        if let Some(not_logged) = context.node.logs.auth_failed.admit() {
            let peer = context.session.peer_text();
            tracing::warn!(
                client = context.session.id,
                %peer,
                failures_not_logged = not_logged,
                "AUTH failed: wrong user name or password (a client with an old password, or \
                 someone guessing: check the address; at most one such line a minute)"
            );
        }
        context.session.wrong_passwords += 1;
        if context.session.wrong_passwords >= WRONG_PASSWORDS_PER_CONNECTION {
            context.session.closing = true; // guessing costs a connection every few tries
        }
        return Err(CommandError::WrongPassword);
    }
    Ok(())
}

/// Whether `given` is the configured secret `expected` (in a time that tells nothing of
/// it); false when none is configured.
fn secret_matches(expected: Option<&str>, given: &[u8]) -> bool {
    expected.is_some_and(|expected| password_matches(expected.as_bytes(), given))
}
